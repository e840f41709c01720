"""Update rules: the interface, the built-in rules and the registry."""
