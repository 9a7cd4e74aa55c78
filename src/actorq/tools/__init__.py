"""After a run: a trained policy loaded for use (``agent``: ``actorq.load``) and videos of it
(``video``). Their commands are ``actorq evaluate``, ``.export`` and ``.report``."""
