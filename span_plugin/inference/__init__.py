"""Inference on raw text from a checkpoint alone: one hub base and an adapter per task."""
