"""Topic matching: the trie agrees with a direct reading of the AMQP topic rules."""


from hypothesis import given, settings, strategies as st

from broker.core.topic import TopicTrie

words = st.sampled_from(["a", "b", "c", "*", "#", ""])
keys = st.lists(words, min_size=1, max_size=5).map(".".join)
routing_words = st.sampled_from(["a", "b", "c", "", "d"])
routing_keys = st.lists(routing_words, min_size=1, max_size=6).map(".".join)


def split_words(key: str) -> list:
    return key.split(".") if key else []


def reference_match(binding_key: str, routing_key: str) -> bool:
    """`*` is exactly one word, `#` zero or more words; words are dot separated and
    the empty key has no words (RabbitMQ: `*` does not match "")."""
    def match(pattern: list, words: list) -> bool:
        if not pattern:
            return not words
        head, rest = pattern[0], pattern[1:]
        if head == "#":
            return any(match(rest, words[i:]) for i in range(len(words) + 1))
        if not words:
            return False
        return (head == "*" or head == words[0]) and match(rest, words[1:])
    return match(split_words(binding_key), split_words(routing_key))


@settings(max_examples=300)
@given(st.lists(keys, min_size=1, max_size=6), routing_keys)
def test_trie_matches_reference(binding_keys, routing_key):
    trie = TopicTrie()
    for index, key in enumerate(binding_keys):
        trie.add(key, index)
    expected = {i for i, key in enumerate(binding_keys) if reference_match(key, routing_key)}
    assert set(trie.match(routing_key)) == expected


@given(st.lists(keys, min_size=2, max_size=6), routing_keys)
def test_removing_a_binding_forgets_only_that_binding(binding_keys, routing_key):
    trie = TopicTrie()
    for index, key in enumerate(binding_keys):
        trie.add(key, index)
    trie.match(routing_key)           # fill the cache, which removal must invalidate
    trie.remove(binding_keys[0], 0)
    expected = {i for i, key in enumerate(binding_keys)
                if i and reference_match(key, routing_key)}
    assert set(trie.match(routing_key)) == expected


def test_same_destination_bound_twice_survives_one_unbind():
    trie = TopicTrie()
    trie.add("a.*", "q")
    trie.add("a.*", "q")
    trie.remove("a.*", "q")
    assert trie.match("a.b") == ("q",)
    trie.remove("a.*", "q")
    assert trie.match("a.b") == ()


def test_examples_from_the_rabbitmq_tutorial():
    trie = TopicTrie()
    trie.add("*.orange.*", "Q1")
    trie.add("*.*.rabbit", "Q2")
    trie.add("lazy.#", "Q2")
    assert set(trie.match("quick.orange.rabbit")) == {"Q1", "Q2"}
    assert set(trie.match("lazy.orange.elephant")) == {"Q1", "Q2"}
    assert set(trie.match("quick.orange.fox")) == {"Q1"}
    assert set(trie.match("lazy.brown.fox")) == {"Q2"}
    assert set(trie.match("lazy.pink.rabbit")) == {"Q2"}
    assert set(trie.match("quick.brown.fox")) == set()
    assert set(trie.match("orange")) == set()
    assert set(trie.match("lazy.orange.male.rabbit")) == {"Q2"}
