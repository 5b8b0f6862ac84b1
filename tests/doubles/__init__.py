"""Test doubles for coordination tests at scale; never on the product's default path."""
