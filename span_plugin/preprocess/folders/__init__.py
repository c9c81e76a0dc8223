"""Task folders, one builder per input format (GLUE, users' tables, CoNLL, extractive QA,
phrase pairs), the phrase aligner, and ``span-preprocess check``."""
