"""Governance by Tower on the operator's side: governed calls filed with Tower, suspend and resume."""
