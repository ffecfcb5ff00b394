"""A stateful bolt that names its own field ``state``: stormpy keeps its handles under private names,
so a component may use any attribute name (tests/task/test_user_attribute_names.py runs it)."""
from stormpy import StatefulBolt


class WordCounter(StatefulBolt):              # Storm's IStatefulBolt + KeyValueState
    def initialize(self, stormconf, context):
        self.state = None                     # your attribute names are yours, `state` too

    def init_state(self, state):              # restored from the last committed checkpoint
        self.state = state

    def process(self, tup):
        self.state.put(tup.values.word, self.state.get(tup.values.word, 0) + 1)
