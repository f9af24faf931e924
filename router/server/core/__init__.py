"""The router's core: connections, dispatch, commands, subscriptions, delivery."""
