"""Entity tag schemes: reading IOB1, IOB2 and BIOES into IOB2 (:func:`to_iob2`, ill-formed
tags repaired as conlleval reads them, or an error), and chunking with conlleval's
semantics (:func:`entities`: predictions are never repaired). Pure Python; shared by
``span-preprocess conll``, the NER criterion and the hub. Each scheme's mapping:
docs/NER.md, section "Module notes"."""

SCHEMES = ("iob1", "iob2", "bioes")
PREFIXES = {"iob1": "BI", "iob2": "BI", "bioes": "BIES"}
OUTSIDE = "O"


class TagError(ValueError):
    """A tag that is not in the scheme, or an ill-formed sequence (``position`` is the
    0-based index of the bad tag in its sentence)."""

    def __init__(self, position, message):
        super().__init__(message)
        self.position = position


def split_tag(tag):
    """``"B-PER"`` -> ``("B", "PER")``; ``"O"`` -> ``("O", None)``."""
    if tag == OUTSIDE:
        return OUTSIDE, None
    prefix, _, kind = tag.partition("-")
    return prefix, kind


def to_iob2(tags, scheme, repair=True):
    """A sentence's tags in ``scheme`` -> ``(iob2_tags, repairs)``.

    repairs: how many ill-formed tags were read as conlleval reads them: ``I-``/``E-``
    tags read as entity starts, and (BIOES) entities that no ``E-`` ends, ended at
    their last tag. Raises :class:`TagError` for a tag outside the scheme, or
    (``repair=False``) for an ill-formed one.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"tag scheme {scheme!r}: expected one of {SCHEMES}")
    allowed = PREFIXES[scheme]
    out, repairs, previous = [], 0, None  # previous: type of the open entity, or None

    def unclosed(i, tag):
        """BIOES: the entity whose last tag is ``tags[i - 1]`` has no E-; ``tag`` follows."""
        nonlocal repairs
        if not repair:
            last = tags[i - 1]
            after = "the end of the sentence" if tag is None else repr(tag)
            raise TagError(i - 1, f"tag {last!r} is followed by {after}: ill-formed in bioes "
                           f"(an entity begun by B- ends with E-{previous}; a one-word entity "
                           f"is S-{previous}); --bad-tags repair ends it there, as conlleval")
        repairs += 1

    for i, tag in enumerate(tags):
        prefix, kind = split_tag(tag)
        if scheme == "bioes" and previous is not None and not (
                prefix in "IE" and prefix != OUTSIDE and kind == previous):
            unclosed(i, tag)
        if tag == OUTSIDE:  # "O-MISC" is no O: it is outside every scheme (below)
            out.append(OUTSIDE)
            previous = None
            continue
        if len(prefix) != 1 or prefix not in allowed or not kind:
            raise TagError(i, f"tag {tag!r} is not in the {scheme} scheme (expected O or "
                           f"{'/'.join(allowed)}-TYPE)")
        continues = previous == kind
        if prefix in "BS" or (prefix in "IE" and not continues):
            if prefix in "IE" and not continues and scheme != "iob1":
                if not repair:
                    after = "O" if previous is None else f"an entity of type {previous}"
                    raise TagError(i, f"tag {tag!r} after {after}: ill-formed in {scheme} "
                                   f"(--bad-tags repair reads it as B-{kind}, as conlleval)")
                repairs += 1
            out.append("B-" + kind)
        else:
            out.append("I-" + kind)
        # BIOES: an entity ends at E- or S-, so what follows cannot continue it.
        previous = None if prefix in "ES" else kind
    if scheme == "bioes" and previous is not None:
        unclosed(len(tags), None)
    return out, repairs


def entities(tags):
    """Entities of a tag sequence with conlleval's chunk rules, as
    ``[(start, end, type)]``, end exclusive. An ``I-X`` that does not continue an
    entity of type X starts one; ``E-``/``S-`` (BIOES) are read as conlleval does."""
    out = []
    start, kind = None, None
    for i, tag in enumerate(list(tags) + [OUTSIDE]):
        prefix, k = split_tag(tag)
        # conlleval's end_of_chunk / start_of_chunk, for the schemes above.
        begins = prefix in "BS" or (prefix in "IE" and k != kind) if prefix != OUTSIDE else False
        if kind is not None and (prefix == OUTSIDE or begins or k != kind):
            out.append((start, i, kind))
            kind = None
        if begins:
            start, kind = i, k
        if kind is not None and prefix in "ES":
            out.append((start, i + 1, kind))
            kind = None
    return out


def tags_of(spans, length):
    """IOB2 tags ``[length]`` of non-overlapping ``(start, end, type)`` spans."""
    tags = [OUTSIDE] * length
    for start, end, kind in spans:
        tags[start] = "B-" + kind
        for i in range(start + 1, end):
            tags[i] = "I-" + kind
    return tags


def tag_names(types):
    """The stored tag inventory: ``O``, then ``B-X``, ``I-X`` per type in sorted order
    (tag id = index)."""
    names = [OUTSIDE]
    for kind in sorted(types):
        names += ["B-" + kind, "I-" + kind]
    return names


def types_of(names):
    """Entity types of a tag inventory made by :func:`tag_names`, in order."""
    return [n[2:] for n in names if n.startswith("B-")]
