"""SMTP ingress: `tidings smtp` accepts mail from applications that only speak SMTP."""
