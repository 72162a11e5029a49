"""The kanin command line."""
