"""The data record of a task folder (``provenance.json``): file hashes, what each part of
the encoder writes into it, and the encoder rebuilt from it at inference."""
