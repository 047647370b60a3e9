"""Service functions: each owns its transaction and the business rules of one area."""
