"""Governance by Tower (spec 002): the signed events webhook's checks, its events, and a Tower client."""
