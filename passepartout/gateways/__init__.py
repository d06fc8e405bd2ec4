"""Gateways: where people talk to Passepartout (terminal, Telegram, Signal), and the
hub every one of them hands its signals to (hub.hy)."""
