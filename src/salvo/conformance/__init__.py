"""(placeholder: see the hand fixes)"""
