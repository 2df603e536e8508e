"""What arrives at the engine: request arrivals and prompt/output length distributions, seeded
(:mod:`.arrivals`).
"""
