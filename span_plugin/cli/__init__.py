"""Thin command lines over the library: span-preprocess, span-convert, span-predict."""
