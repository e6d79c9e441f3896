"""Renderers for run directories: a self-contained HTML page and GFM Markdown, with plots."""
