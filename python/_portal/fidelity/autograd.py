"""Tensors in an autograd graph, at a resume point (issue 6, "faithfulness").

A checkpoint cannot hold a graph: its nodes are C++ objects with saved buffers.
Two cases are told apart by walking the graph from the tensor's grad_fn:

  consumed  backward() already ran through it and freed its saved buffers (the
            hidden state of truncated BPTT, last iteration's loss): going back
            through it again is an error under python too, so the tensor is saved
            as a leaf with its values, and the suspend message names it;
  live      it could still be back-propagated (losses summed across iterations
            for a later backward(), activations inside a forward pass): saving it
            would cut the graph silently, so this loop is not the resume point -
            Portal declines it and the next loop out is tried.
"""

_FREED = "after they have already been freed"
_MAX_NODES = 100_000


def graph_state(tensor):
    """'leaf' (no graph), 'consumed' or 'live' (see the module docstring)."""
    node = getattr(tensor, "grad_fn", None)
    if node is None:
        return "leaf"
    # Keyed by id, holding the node: each access to next_functions makes new
    # Python objects for the nodes, and a freed one's id would be reused.
    seen, todo = {}, [node]
    while todo and len(seen) < _MAX_NODES:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen[id(node)] = node
        for name in dir(node):
            if name.startswith("_saved_"):
                try:
                    getattr(node, name)
                except RuntimeError as e:
                    if _FREED in str(e):
                        return "consumed"
        todo.extend(next_node for next_node, _ in getattr(node, "next_functions", ()))
    return "live"
