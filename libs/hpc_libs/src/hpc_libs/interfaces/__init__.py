"""Integration interfaces: one module per integration, each with a provider and a requirer."""
