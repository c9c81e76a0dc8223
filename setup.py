from setuptools import find_packages, setup

setup(
    name="span_plugin",
    version="0.3.0",
    description="Span Fine-tuning (Bao, Zhang, Zhao) as a fairseq --user-dir plugin",
    packages=find_packages(include=["span_plugin", "span_plugin.*"]),
    package_data={"span_plugin": ["resources/*"]},
    python_requires=">=3.9",
    install_requires=[
        # fairseq 0.12.2 does not import on Python 3.11. ve-fairseq ships cp311 and
        # cp312 wheels; fairseq-fixed is the same code base as an sdist (install.sh
        # builds it where no ve-fairseq wheel fits). Both ask for torchaudio (unused
        # here, and no release exists for torch 2.13): install.sh uses --no-deps.
        "ve-fairseq==0.12.3; python_version == '3.11' or python_version == '3.12'",
        "fairseq-fixed==0.12.3.1; python_version != '3.11' and python_version != '3.12'",
        "torch>=2.0",
        "numpy",
        "hydra-core>=1.3.2,<1.4",
        "omegaconf>=2.3,<2.4",
        "bitarray",
        "sacrebleu>=1.4.12",
        "regex",
        "cffi",
        "cython",
        "tqdm",
        "scikit-learn",
        "scipy",
        "packaging",
        "sentencepiece",
        "fastBPE",
        "tensorboard",
        "tensorboardX",
        "matplotlib",
        "tokenizers",
        "safetensors",
    ],
    extras_require={
        "test": ["pytest"],
        # --segmentation chunker: NLTK's JSON tagger format (3.9+); data via --nltk-data
        "chunker": ["nltk>=3.9"],
        # span-export onnx: the dynamo exporter (onnxscript) and the check in ONNX Runtime
        "onnx": ["onnx>=1.17", "onnxruntime>=1.20", "onnxscript>=0.2"],
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
