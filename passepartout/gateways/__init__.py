"""Gateways: where people talk to Passepartout (terminal, Telegram, Signal)."""
