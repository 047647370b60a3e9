"""Starting and running Tidings: the `tidings` command, the dev supervisor, embedded servers,
gunicorn, migrations and the MCP server."""
