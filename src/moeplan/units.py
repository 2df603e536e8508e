"""Units shared by every layer (pure constants; sizes are bytes, times seconds)."""

KIB = 1024
MIB = 1024**2
GIB = 1024**3
TIB = 1024**4
