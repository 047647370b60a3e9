"""Who a caller is and what it may do: API keys, the callers each process remembers, the rate limit."""
