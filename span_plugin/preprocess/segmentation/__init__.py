"""What makes spans: n-gram dictionaries (counting, the text format, task-row leakage),
the registered segmentation kinds (greedy, random, none, chunker) and the encoder that
joins a tokenizer with a segmenter: text -> (tokens, spans)."""
