"""Sampling: from logits to the probabilities a token is drawn from.

``settings`` (no torch) is the plain record the window edits and ``checks`` its limits;
``processors`` holds the stages (transformers' protocol ``__call__(input_ids, scores)``), the
chain that runs them and ``build_chain``; ``help`` is one sentence per setting. Importing this
package loads no torch: the window builds settings before the engine loads.
"""
