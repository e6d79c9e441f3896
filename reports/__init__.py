"""Renderers for run directories: Markdown now; HTML and plots arrive with the report issue."""
