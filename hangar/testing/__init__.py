"""Test helpers shipped with hangar: scripted model API servers for driving the real agent CLIs offline."""
