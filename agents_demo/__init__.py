"""The demo behind the README's first command: agents sharing one user's memory."""
