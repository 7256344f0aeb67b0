# bench: rules are added as the room grows
