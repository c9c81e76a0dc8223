"""Readers and writers of users' data files (GLUE TSV, tables, CoNLL, phrase-pair JSON
Lines) and tag schemes: plain Python, no torch, no fairseq."""
