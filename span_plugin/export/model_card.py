"""The model card (``README.md``) of an exported fine-tuned model folder: what the model
does (task, heads, labels), what its inputs must be made with (the data record:
tokenizer, n-gram dictionary, segmentation), its dev results when the run wrote them,
and the lines that load the folder. Written from ``config.json``'s dict alone."""

import json

from span_plugin.formats.model_folder import encoder_family
from span_plugin.portable.tasks import TASKS

# How the folder is loaded without fairseq (span_plugin.portable: the predictor of the
# task) and, for the encoder alone, with transformers'.
LOAD_LINES = ("from span_plugin.portable import load_model",
              "model = load_model(\"{dir}\")",
              "{call}")


def _call(span):
    """The task's example call (:data:`span_plugin.portable.tasks.TASKS`), for its inputs."""
    call = TASKS[span["task"]].example if span["task"] in TASKS else "model.predict(...)"
    if isinstance(call, dict):
        inputs = (span.get("data_record") or {}).get("inputs")
        call = call.get(inputs, call[1] + "  # or pairs (a, b)" if inputs is None else call[1])
    return call


ENCODER_LINES = ("from transformers import AutoModel, AutoTokenizer",
                 "tokenizer, encoder = AutoTokenizer.from_pretrained(\"{dir}\"), "
                 "AutoModel.from_pretrained(\"{dir}\")",
                 "features = encoder(**tokenizer(\"A sentence.\", return_tensors=\"pt\"))"
                 ".last_hidden_state")


def _record_lines(record):
    enc = record.get("encoder") or {}
    lines = [f"- tokenizer: {enc.get('bpe', 'not recorded')}"]
    ngrams = enc.get("ngrams")
    if ngrams:
        built = ngrams.get("built") or {}
        corpus = f", counted on {built['corpus']}" if built.get("corpus") else ""
        lines.append(f"- n-gram dictionary: `{ngrams.get('file')}` (sha256 "
                     f"{ngrams.get('sha256', '')[:12]}, top-k {ngrams.get('top_k') or 'all'}, "
                     f"{ngrams.get('words')} words{corpus})")
    chunker = enc.get("chunker")
    if chunker:
        lines.append(f"- chunker: `{chunker.get('file')}` ({chunker.get('chunker')}, model "
                     f"sha256 {chunker.get('model_sha256', '')[:12]})")
    lines.append(f"- segmentation: {enc.get('segmentation', 'not recorded')}, seed "
                 f"{enc.get('seed')}")
    for key, name in (("task", "data"), ("inputs", "inputs per example"),
                      ("rows", "rows"), ("command", "made with")):
        if record.get(key) is not None:
            value = record[key]
            lines.append(f"- {name}: " + (f"`{value}`" if key == "command" else
                                          json.dumps(value) if isinstance(value, dict)
                                          else str(value)))
    return lines


# A pipeline example per transformers pipeline task; {dir}: the folder.
PIPELINE_LINES = {
    "text-classification": ("from transformers import pipeline",
                            "classify = pipeline(\"text-classification\", model=\"{dir}\")",
                            "classify({example})"),
    "token-classification": ("from transformers import pipeline",
                             "tag = pipeline(\"token-classification\", model=\"{dir}\")",
                             "tag(\"EU rejects German call to boycott British lamb .\")"),
}


def _install_line(span):
    chunker = ((span.get("data_record") or {}).get("encoder") or {}).get("chunker")
    return "pip install 'span_plugin[chunker]'" if chunker else "pip install span_plugin"


def _pipeline_example(span):
    inputs = (span.get("data_record") or {}).get("inputs")
    if inputs == 2:
        return ("{\"text\": \"A man plays a flute.\", \"text_pair\": "
                "\"A man is playing a flute.\"}")
    return "\"A fine, funny film.\""


def transformers_lines(config, folder="DIR"):
    """What ``transformers`` alone can and cannot do with the folder (the card's first
    lines name it; ``## With transformers`` shows it), from ``span_export.transformers``."""
    span = config["span_plugin"]
    chosen = (config.get("span_export") or {}).get("transformers") or {}
    pipe = chosen.get("pipeline")
    lm = "no masked-LM head (fine-tuning does not train one), so no fill-mask"
    if pipe:
        lines = [f"`transformers` alone (no span_plugin) loads it as its own "
                 f"`{chosen['class']}`: `pipeline(\"{pipe}\", model=\"{folder}\")` predicts "
                 f"what `load_model` predicts, with the label names above; {lm}."]
        code = PIPELINE_LINES[pipe]
    else:
        model_type = config.get("model_type")
        lines = [f"`transformers` alone cannot run it: its model type `{model_type}` is "
                 f"span_plugin's own, which `transformers` refuses by that name, since "
                 f"{chosen.get('why') or 'no transformers class computes its heads'}; {lm}."]
        code = ()
        if span.get("task") in ("span_classification", "sentence_prediction"):
            lines.append("With `import span_plugin.portable` first, the same type runs in "
                         "`pipeline(\"text-classification\", ...)`: the plugin registers it "
                         "and its tokenizer, which makes the spans (see Load below).")
            code = ("import span_plugin.portable  # registers " + str(model_type),
                    *PIPELINE_LINES["text-classification"])
    example = _pipeline_example(span)
    block = ["```python", *(c.format(dir=folder, example=example) for c in code), "```"]
    return lines, (block if code else [])


def model_card(config, results=None, folder="DIR"):
    """The card's Markdown text for ``config`` (config.json's dict, with its
    ``span_plugin`` key) and the run's ``results`` (results.json's dict, or None). Its
    first lines: what the model is, how to install, how to predict, what
    ``transformers`` alone can and cannot do."""
    span = config["span_plugin"]
    family = encoder_family(config.get("model_type", "?"))
    heads = span.get("heads", {})
    labels = span.get("labels", {})
    kinds = ", ".join(f"`{h['kind']}`" for h in heads.values())
    named = [n for n in labels.values() if isinstance(n, list)]
    what = (f"A {family} encoder fine-tuned by span_plugin for "
            f"{TASKS[span['task']].words if span['task'] in TASKS else span['task']} (head {kinds}"
            + (f"; labels {', '.join(map(str, named[0]))}" if named else "") + ").")
    can, pipeline_block = transformers_lines(config, folder)
    out = [f"# {span['task']} model ({family} encoder, span_plugin export format "
           f"{span['format']})", "", what, "",
           f"Install: `{_install_line(span)}` (no fairseq; add `transformers` for its "
           f"pipeline). Predict with span_plugin, which encodes text as training did:", "",
           "```python", *(line.format(dir=folder, call=_call(span)) for line in LOAD_LINES),
           "```", "", *can, "",
           f"Exported by `span-export hf`: the encoder is a Hugging Face {family} "
           f"(`{config['architectures'][0]}`, {config['num_hidden_layers']} layers, hidden "
           f"size {config['hidden_size']}), the task's heads are in `model.safetensors` "
           f"(under `span_heads.`, or the transformers class's `classifier.`). No file here "
           f"is a pickle; `files.json` lists the sha256 of every "
           f"file, and `load_model` checks the folder whole at load (the listing, then "
           f"config.json against the tensors, labels and tokenizer, finite weights) before "
           f"it builds anything.", "", "## Heads and labels", ""]
    for name, head in heads.items():
        options = ", ".join(f"{k}={v}" for k, v in sorted(head["options"].items()))
        out.append(f"- `{name}`: kind `{head['kind']}` ({options}), reads "
                   f"{', '.join(['features', *head['inputs']])}")
        names = labels.get(name)
        if isinstance(names, dict):
            for part, values in names.items():
                out.append(f"  - {part} labels: {', '.join(map(str, values))}")
        elif names:
            out.append(f"  - labels (class order): {', '.join(map(str, names))}")
        else:
            out.append("  - no label names (regression or answer positions)")
    out += ["", "## Inputs: the data record", "",
            "Text must be tokenized and segmented as in training:", "",
            *_record_lines(span.get("data_record") or {}), ""]
    out += ["## Dev results", ""]
    if results:
        out += ["From the run's `results.json`:", "", "```json",
                json.dumps(results, indent=2, sort_keys=True), "```", ""]
    else:
        out += ["No `results.json` was beside the checkpoint.", ""]
    out += int8_lines(span.get("int8"))
    out += ["## Load", "", "```python",
            *(line.format(dir=folder, call=_call(span)) for line in LOAD_LINES), "```", ""]
    if pipeline_block:
        out += ["With transformers' pipeline:", "", *pipeline_block, ""]
    if (config.get("span_export") or {}).get("transformers", {}).get("pipeline"):
        out += ["The encoder alone, with transformers' own classes:", "", "```python",
                *(line.format(dir=folder) for line in ENCODER_LINES), "```", "",
                "`AutoTokenizer` gives the token ids of training: leading and trailing "
                "white space is stripped, as the hub and `load_model` strip it (a GPT-2 "
                "tokenizer here does so by its normalizer).", ""]
    return "\n".join(out)


INT8_TITLE = "## int8 on the CPU"


def int8_lines(record):
    """The card's int8 section (its title first, a blank line last) for the record
    ``span-export int8-check`` writes into ``config.json`` (``span_plugin.int8``);
    none without one."""
    if not record:
        return []
    return [INT8_TITLE, "",
            f"`load_model(DIR, quantize=\"int8\")` and `span-predict --model DIR --quantize "
            f"int8` predict with {record['method']}. Measured on "
            f"{record['examples']} examples of {record['source']}:", "",
            f"| | {record['metric']} |", "|---|---|",
            f"| float32 | {record['fp32']:.2f} |", f"| int8 | {record['int8']:.2f} |", "",
            f"Drop {record['drop']:.2f} points"
            + ("" if not record.get("drop_interval") else
               f" (95% interval of the examples' draw: {record['drop_interval'][0]:.2f} to "
               f"{record['drop_interval'][1]:.2f})")
            + f"; allowed {record['max_drop']:g}: "
            f"{record['accepted']}; {record['agreement_of']} agreeing between the two: "
            f"{record['agreement']:.2f}%"
            + ("." if record.get("min_agreement") is None
               else f" (least allowed {record['min_agreement']:g})."), ""]


def with_int8_section(text, record):
    """The card ``text`` with its int8 section replaced by (or, without one, put before
    ``## Load``, else at the end) :func:`int8_lines` of ``record``."""
    lines = text.split("\n")
    section = int8_lines(record)
    if INT8_TITLE in lines:
        start = lines.index(INT8_TITLE)
        end = next((k for k in range(start + 1, len(lines)) if lines[k].startswith("## ")),
                   len(lines))
        return "\n".join(lines[:start] + section + lines[end:])
    at = lines.index("## Load") if "## Load" in lines else len(lines)
    return "\n".join(lines[:at] + section + lines[at:])


def write_model_card(path, config, results=None, folder="DIR"):
    """Write :func:`model_card` to ``path`` (UTF-8, ``\\n`` line ends); ``folder``: the
    name the load lines give the folder."""
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(model_card(config, results, folder))
