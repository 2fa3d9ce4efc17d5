"""The control loop of one StreamJob: observe (read-only), decide (pure), and the types between them.

Layering, lowest first: ``names``/``model``/``changes``/``policy`` (pure values),
``decide`` (pure), ``observe`` (reads the world). ``streamjob_operator.k8s``
acts on the decisions; ``streamjob_operator.handlers`` wires it into kopf.
"""
