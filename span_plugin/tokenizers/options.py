"""A setting a kind reads (a tokenizer's file, a segmentation's data folder), declared
once beside the kind: its ``EncoderSpec`` field, the names users give it, its help, and
the files a given path stands for in a data record. The command lines, the hub's
keywords and the record are all made from these declarations."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Option:
    """``field``: the ``EncoderSpec`` / ``make_encoder`` keyword. ``names``: what users
    call it; the first is the command-line flag (``gpt2_encoder_json`` ->
    ``--gpt2-encoder-json``) and the name errors use, every name is a hub keyword
    (default: the field). ``recorded``: ``path -> {record key: path or None}``, the files
    a given path stands for in a data record and how it is checked at inference
    (default: ``{field: path}``)."""

    field: str
    names: tuple = ()
    help: str = None
    metavar: str = None
    recorded: object = None

    def __post_init__(self):
        if not self.names:
            object.__setattr__(self, "names", (self.field,))

    @property
    def name(self):
        return self.names[0]

    @property
    def flags(self):
        return tuple("--" + n.replace("_", "-") for n in self.names)

    @property
    def keywords(self):
        """The keywords the hub takes for it: its names and its field."""
        return tuple(dict.fromkeys((*self.names, self.field)))

    def recorded_files(self, path):
        """``{record key: path or None}`` of a given path."""
        return self.recorded(path) if self.recorded else {self.field: str(path)}


def add_arguments(group, options):
    """One argparse argument per option (all default to None: given or not)."""
    for option in options:
        group.add_argument(*option.flags, dest=option.field, help=option.help,
                           metavar=option.metavar or option.name.upper())


def values_by_field(given, options, where):
    """``{keyword: value}`` (any keyword of ``options``; None = not given) ->
    ``{field: value}`` of the values given. An unknown keyword is a TypeError naming
    the known ones; one field given under two names is a ValueError."""
    by_keyword = {k: o for o in options for k in o.keywords}
    out, named = {}, {}
    for keyword, value in given.items():
        option = by_keyword.get(keyword)
        if option is None:
            raise TypeError(f"{where}: unknown argument {keyword!r}; expected one of "
                            f"{tuple(by_keyword)}")
        if value is None:
            continue
        if option.field in out:
            raise ValueError(f"{where}: {named[option.field]} and {keyword} name the same "
                             f"file; give one")
        out[option.field], named[option.field] = value, keyword
    return out
