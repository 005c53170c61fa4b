"""Data brokers: replica manager, partition state (HW/LEO/ISR), replica fetcher, purgatory."""
