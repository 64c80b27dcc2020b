"""The Thespian transport: starting an actor system on loopback, authenticating its messages,
the patches and internals of Thespian this project relies on, and the plain data that crosses it."""
