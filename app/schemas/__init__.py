"""What every way in accepts and answers (marshmallow, per ../shared/API.md): the HTTP routes, the
batch and SMTP services, the CLI and MCP validate with these same schemas."""
