"""Text encoders (GPT-2 BPE, sentencepiece, fastBPE, WordPiece) behind one interface,
with word boundaries and character offsets: plain Python, no torch, no fairseq."""
