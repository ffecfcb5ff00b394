"""``stormpy local``: a whole topology in one process (``runner``) over an in-process ``transfer``."""
