"""The classroom: lessons (YAML files), guess rounds, and a run written out as JSON, CSV,
Markdown or a self-contained web page."""
