"""Sphinx configuration of Switchyard's documentation: Markdown pages read by MyST-Parser.

Build it with ``make docs``, or as CI does (tests/project/test_docs.py)::

    sphinx-build -W --keep-going -n -b html docs build/docs

``-W`` makes every warning an error: a link to a page or a heading anchor that does not
exist, an image that is missing, a page left out of the table of contents.
"""

project = "Switchyard"
author = "Switchyard's authors"
copyright = "Switchyard's authors"

extensions = ["myst_parser"]

source_suffix = {".md": "markdown"}
root_doc = "index"
# Pages are the Markdown files of docs/; the screenshots are images the pages show, and
# examples/ holds Python modules the pages include ({literalinclude}), not pages.
exclude_patterns = ["_build", "screenshots", "examples", "**/__pycache__", ".DS_Store"]

# Every heading down to ### gets an anchor, so [text](page.md#a-heading) links work; a link to
# a page or an anchor that does not exist is a warning (myst.xref_missing), so an error with -W.
myst_heading_anchors = 3
# Broken references are errors (-n does the same on the command line).
nitpicky = True

html_theme = "furo"
html_title = "Switchyard"
html_static_path = []
# The pages are the source: no "show source" link to a copy of them.
html_show_sourcelink = False
