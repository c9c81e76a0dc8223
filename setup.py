from setuptools import find_packages, setup

setup(
    name="span_plugin",
    version="0.3.0",
    description="Span Fine-tuning (Bao, Zhang, Zhao) as a fairseq --user-dir plugin",
    packages=find_packages(include=["span_plugin", "span_plugin.*"]),
    package_data={"span_plugin": ["resources/*"]},
    python_requires=">=3.9",
    # What prediction from exported folders (span_plugin.portable, span-predict --model),
    # preprocessing (span-preprocess) and conversion (span-convert) import; nothing of the
    # training stack. tests/test_lean_install.py installs the wheel with exactly these.
    install_requires=[
        "torch>=2.0",  # a CPU-only wheel is the small one (docs/INSTALL.md)
        "numpy",
        "regex",
        "safetensors",
        "sentencepiece",
        "tokenizers",
        "tqdm",
    ],
    extras_require={
        # fairseq-train --user-dir span_plugin and everything that loads a checkpoint: the
        # fairseq fork's run-time dependencies and the plugin's training ones. Not the
        # fork itself (ve-fairseq, or fairseq-fixed where no wheel fits): its metadata
        # asks for torchaudio, unused here and without a release for torch 2.13, so
        # install.sh installs it with --no-deps; nor fastBPE 0.1.0 (--bpe fastbpe), whose
        # pre-generated C++ compiles on 3.11+ only when built without isolation. The whole
        # training install is `bash install.sh`.
        "train": [
            "hydra-core>=1.3.2,<1.4",
            "omegaconf>=2.3,<2.4",
            "bitarray",
            "sacrebleu>=1.4.12",
            "cffi",
            "cython",
            "scikit-learn",
            "scipy",
            "packaging",
            "tensorboard",
            "tensorboardX",
            "matplotlib",
        ],
        "test": ["pytest"],
        # --segmentation chunker: NLTK's JSON tagger format (3.9+); data via --nltk-data
        "chunker": ["nltk>=3.9"],
        # span-export onnx: the dynamo exporter (onnxscript) and the check in ONNX Runtime
        "onnx": ["onnx>=1.17", "onnxruntime>=1.20", "onnxscript>=0.2"],
        # load_model(DIR, encoder="transformers"): transformers' own class
        "transformers": ["transformers"],
    },
    entry_points={
        "console_scripts": [
            "span-preprocess = span_plugin.cli.preprocess:main",
            "span-predict = span_plugin.cli.predict:main",
            "span-convert = span_plugin.cli.convert:main",
            "span-export = span_plugin.cli.export:main",
        ],
    },
)
