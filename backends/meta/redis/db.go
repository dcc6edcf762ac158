package redismeta

// DB is the database the store's client selected. A KVCM of the legacy layout ignores db= and
// keeps its blocks in database 0, so in another database an absent key proves nothing.
func (s *Store) DB() int { return s.db }
