"""Experiment pipelines behind the book's chapters (one module per paper); notebooks call these and plot."""
