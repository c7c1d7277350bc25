"""Reports: the JSON document and its schema, HTML and text, charts, summaries for CI, the class summary."""
