"""Topic routing: a trie over dot-separated words with `*` and `#` wildcards."""

MATCH_CACHE_SIZE = 4096


class _Node:
    __slots__ = ("children", "destinations")

    def __init__(self):
        self.children: dict[str, _Node] = {}
        self.destinations: dict = {}   # destination -> number of binding keys ending here


class TopicTrie:
    """Binding keys stored word by word; `match(routing_key)` walks only live branches.

    Results are cached per routing key until the next bind or unbind, so a steady stream
    of messages with a few routing keys costs one dict lookup each.
    """

    def __init__(self):
        self._root = _Node()
        self._cache: dict[str, tuple] = {}

    def add(self, binding_key: str, destination) -> None:
        node = self._root
        for word in split_words(binding_key):
            node = node.children.setdefault(word, _Node())
        node.destinations[destination] = node.destinations.get(destination, 0) + 1
        self._cache.clear()

    def remove(self, binding_key: str, destination) -> None:
        path = [self._root]
        words = split_words(binding_key)
        for word in words:
            child = path[-1].children.get(word)
            if child is None:
                return
            path.append(child)
        leaf = path[-1]
        count = leaf.destinations.get(destination, 0)
        if count <= 1:
            leaf.destinations.pop(destination, None)
        else:
            leaf.destinations[destination] = count - 1
        self._prune(words, path)
        self._cache.clear()

    @staticmethod
    def _prune(words: list, path: list) -> None:
        for depth in range(len(words), 0, -1):
            node = path[depth]
            if node.children or node.destinations:
                return
            del path[depth - 1].children[words[depth - 1]]

    def match(self, routing_key: str) -> tuple:
        cached = self._cache.get(routing_key)
        if cached is not None:
            return cached
        found: dict = {}
        _match(self._root, split_words(routing_key), 0, found)
        result = tuple(found)
        if len(self._cache) >= MATCH_CACHE_SIZE:
            self._cache.clear()
        self._cache[routing_key] = result
        return result


def split_words(key: str) -> list[str]:
    """The words of a key; the empty key has no words (so `*` does not match it)."""
    return key.split(".") if key else []


def _match(node: _Node, words: list, index: int, found: dict) -> None:
    children = node.children
    if index == len(words):
        found.update(node.destinations)
        hash_node = children.get("#")
        if hash_node is not None:
            _match(hash_node, words, index, found)
        return
    word = words[index]
    if word != "*" and word != "#":   # a wildcard word is reached through the wildcard arms
        exact = children.get(word)
        if exact is not None:
            _match(exact, words, index + 1, found)
    star = children.get("*")
    if star is not None:
        _match(star, words, index + 1, found)
    hash_node = children.get("#")
    if hash_node is not None:
        for rest in range(index, len(words) + 1):
            _match(hash_node, words, rest, found)
