from tools.gateway_capture.capture import main

raise SystemExit(main())
