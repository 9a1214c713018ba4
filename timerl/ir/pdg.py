"""The polyhedral dependence graph: a networkx.MultiDiGraph of op nodes and access edges."""

from __future__ import annotations

import networkx as nx

from .ops import Edge, Node, Op, Slice


class PDG(nx.MultiDiGraph):
    """Nodes are ints with a :class:`Node` record under ``"node"``; edges run consumer ->
    producer with an :class:`Edge` record under ``"edge"``."""

    def rec(self, n) -> Node:
        return self.nodes[n]["node"]

    def inputs(self, n) -> list[tuple[int, Edge]]:
        """(producer, edge) pairs of node ``n``, by operand position."""
        out = [(p, d["edge"]) for _, p, d in self.out_edges(n, data=True)]
        out.sort(key=lambda pe: pe[1].pos)
        return out

    def consumers(self, n) -> list[tuple[int, Edge]]:
        return [(c, d["edge"]) for c, _, d in self.in_edges(n, data=True)]

    def add_op(self, n: int, node: Node):
        self.add_node(n, node=node)

    def add_dep(self, consumer: int, producer: int, edge: Edge):
        self.add_edge(consumer, producer, edge=edge)

    def roots(self) -> list[int]:
        """Sinks: what keeps computation alive."""
        return [n for n in self.nodes if self.rec(n).op is Op.SINK or self.nodes[n].get("root")]

    def describe(self, n) -> str:
        node = self.rec(n)
        ins = ", ".join(f"{self.rec(p)}{e.index_str()}" for p, e in self.inputs(n))
        return f"%{n} = {node.op.value}({ins}) domain={node.domain} shape={node.shape if node.shapes else ()}  # {node.name}"

    def to_dot(self) -> str:
        lines = ["digraph pdg {", "  rankdir=BT;", '  node [shape=box, fontname="monospace"];']
        for n in sorted(self.nodes):
            node = self.rec(n)
            dom = ",".join(d.name for d in node.domain)
            shape = tuple(node.shape) if node.shapes else ()
            label = f"{n}: {node.op.value}\\n{node.name}\\n[{dom}] {shape}"
            lines.append(f'  n{n} [label="{label}"];')
        for c, p, d in self.edges(data=True):
            e = d["edge"]
            lab = e.index_str()
            if e.cond is not None:
                lab += f" if {e.cond}"
            lines.append(f'  n{c} -> n{p} [label="{lab}"];')
        lines.append("}")
        return "\n".join(lines) + "\n"

    def __str__(self):
        return "\n".join(self.describe(n) for n in sorted(self.nodes))


__all__ = ["PDG", "Edge", "Node", "Op", "Slice"]
