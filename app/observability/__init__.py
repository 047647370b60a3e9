"""What the stack tells about itself: counters, gauges, logs, live news, event streams, throughput."""
