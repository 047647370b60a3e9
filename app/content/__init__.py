"""What a message says and how it is written: templates, tracking, signed links, MIME, SMS length, addresses."""
