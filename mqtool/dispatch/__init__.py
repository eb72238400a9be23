"""What the broker's dispatchers derive from each record for the consume queues and index (reference §3.2-§3.5, §6.5)."""
