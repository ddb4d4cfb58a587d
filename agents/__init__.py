"""One module per agent: get_config, create, update, act (and make_train for on-policy agents)."""
