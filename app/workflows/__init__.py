"""Workflows: several steps around sends (delays, conditions, digests, throttles) run by workers.

`definition` checks what a client saves and compiles it into plain steps; `conditions`
reads a branch's condition; `engine` moves sets of runs through their steps, a few
statements per step and set, with PostgreSQL as the truth and Celery tasks as the motor.
"""
