from suite.cli import main
from suite.exit import leave

leave(main())
