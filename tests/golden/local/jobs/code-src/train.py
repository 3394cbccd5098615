"""The code the code-container golden job ships (its bundle's sha256 is in the golden files)."""

print("hello from the bundle")
