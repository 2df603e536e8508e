"""Engines: EP layer, hybrid TP-EP layer (MixServe), DEP engine (FinDEP), PP stages (SMIDT)."""
