"""The ``numamem serve`` flags: the table (:mod:`.table`, grouped by topic in :mod:`.host`,
:mod:`.kubelet`, :mod:`.serving` and :mod:`.limits`) and what a flag is (:mod:`.spec`).

This package module imports none of them.
"""
