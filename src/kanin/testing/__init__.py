"""Test helpers shipped with kanin: an embedded broker on a background thread."""
