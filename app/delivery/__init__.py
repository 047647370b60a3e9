"""The engine's shared state and set-based SQL, read by the API and the workers alike: the broker and
its lanes, message and webhook rows, the event log, pauses, breakers, pacing, retries, backlog."""
